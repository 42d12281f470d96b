"""Each transform: input untouched, exact values for fixed seeds, readable repr."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pointgeope.data.transforms import (
    AddNormalizedHeight,
    ChromaticAutoContrast,
    ChromaticJitter,
    ChromaticTranslation,
    Compose,
    ElasticDistortion,
    HueSaturationTranslation,
    RandomFlip,
    RandomJitter,
    RandomRotateZ,
    RandomScale,
    ToData,
    s3dis_train_transform,
)


def make_sample(n: int = 200, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "coord": (rng.random((n, 3)) * [4.0, 3.0, 2.5]).astype(np.float32),
        "color": rng.integers(20, 200, (n, 3)).astype(np.float32),
        "label": rng.integers(0, 13, n).astype(np.int64),
    }


ALL = [
    RandomScale((0.9, 1.1)), RandomScale((0.5, 2.0), anisotropic=True), RandomFlip(p=1.0),
    RandomRotateZ(p=1.0), RandomJitter(0.01, 0.05), ElasticDistortion(p=1.0),
    ChromaticAutoContrast(p=1.0), ChromaticTranslation(p=1.0), ChromaticJitter(p=1.0),
    HueSaturationTranslation(), AddNormalizedHeight(), s3dis_train_transform(),
    s3dis_train_transform("pointcept"),
]


@pytest.mark.parametrize("transform", ALL, ids=lambda t: type(t).__name__)
def test_transform_returns_a_new_sample_and_leaves_its_input_alone(transform):
    sample = make_sample()
    before = {k: v.copy() for k, v in sample.items()}
    out = transform(sample, np.random.default_rng(0))
    assert out is not sample
    assert set(sample) == set(before)
    for key, value in before.items():
        np.testing.assert_array_equal(sample[key], value)
    for key in ("coord", "color"):
        assert out[key].dtype == np.float32 and out[key].shape == sample[key].shape
    np.testing.assert_array_equal(out["label"], sample["label"])
    # Same seed, same result.
    again = transform(sample, np.random.default_rng(0))
    for key in out:
        np.testing.assert_array_equal(out[key], again[key])


def test_random_scale_exact_factor_and_range():
    sample = make_sample()
    out = RandomScale((0.9, 1.1))(sample, np.random.default_rng(4))
    s = np.random.default_rng(4).uniform(0.9, 1.1, 1)
    np.testing.assert_array_equal(out["coord"], (sample["coord"] * s).astype(np.float32))
    for seed in range(20):
        ratio = RandomScale((0.9, 1.1))(sample, np.random.default_rng(seed))["coord"] / sample["coord"]
        assert 0.9 - 1e-6 <= ratio.min() and ratio.max() <= 1.1 + 1e-6
        np.testing.assert_allclose(ratio, ratio[0, 0], rtol=1e-6)


def test_random_flip_negates_x_and_y_only():
    sample = make_sample()
    out = RandomFlip(p=1.0)(sample, np.random.default_rng(0))
    np.testing.assert_array_equal(out["coord"][:, :2], -sample["coord"][:, :2])
    np.testing.assert_array_equal(out["coord"][:, 2], sample["coord"][:, 2])
    same = RandomFlip(p=0.0)(sample, np.random.default_rng(0))
    np.testing.assert_array_equal(same["coord"], sample["coord"])


def test_random_jitter_is_clipped_and_matches_the_seeded_noise():
    sample = make_sample(2000)
    out = RandomJitter(sigma=0.05, clip=0.05)(sample, np.random.default_rng(1))
    delta = out["coord"].astype(np.float64) - sample["coord"]
    assert np.abs(delta).max() <= 0.05 + 1e-6
    assert np.isclose(np.abs(delta).max(), 0.05, atol=1e-6)   # sigma = clip: some noise is clipped
    noise = np.clip(np.random.default_rng(1).standard_normal((2000, 3), dtype=np.float32) * np.float32(0.05),
                    -0.05, 0.05)
    np.testing.assert_allclose(delta, noise, atol=1e-6)


def test_elastic_distortion_is_smooth_and_bounded():
    sample = make_sample(500)
    out = ElasticDistortion(params=((0.2, 0.4),), p=1.0)(sample, np.random.default_rng(0))
    delta = out["coord"] - sample["coord"]
    assert 0 < np.abs(delta).max() < 0.4 * 3   # blurred unit noise is well below 3 sigma
    skipped = ElasticDistortion(p=0.0)(sample, np.random.default_rng(0))
    np.testing.assert_array_equal(skipped["coord"], sample["coord"])


def _box3_zero_padded(a: np.ndarray, axis: int) -> np.ndarray:
    """``(a[i-1] + a[i] + a[i+1]) / 3`` along ``axis``, zero beyond both ends (written with slices)."""
    pad = [(0, 0)] * a.ndim
    pad[axis] = (1, 1)
    p = np.pad(a, pad)

    def take(lo: int, hi: int) -> np.ndarray:   # p without lo entries at the start and hi at the end
        return np.take(p, np.arange(lo, p.shape[axis] - hi), axis=axis)

    return (take(0, 2) + take(1, 1) + take(2, 0)) / 3


def _elastic_reference(coord: np.ndarray, params, rng: np.random.Generator) -> np.ndarray:
    """The definition (Pointcept's ``ElasticDistortion``, PTv1's recipe), written out: per ``(g, m)``, a
    Gaussian ``(D_x, D_y, D_z, 3)`` on the nodes ``lo - g + g k`` (``D = floor(max(x - lo) / g) + 3``,
    ``lo`` the minimum of the points as displaced so far), three box blurs of 3 taps, zero-padded, along x,
    y, z, twice; each point moved by ``m`` times the trilinear interpolation of the 8 nodes around it."""
    x = coord.astype(np.float64)
    assert rng.random() < 1.0                                     # the p-draw that the transform makes first
    for g, m in params:
        lo = x.min(0)
        dims = np.floor((x - lo).max(0) / g).astype(int) + 3
        noise = rng.standard_normal((*dims, 3))
        for _ in range(2):
            for axis in range(3):
                noise = _box3_zero_padded(noise, axis)
        t = (x - (lo - g)) / g                                    # position in node units, in [1, D - 2)
        i = np.floor(t).astype(int)
        w = t - i
        shift = np.zeros_like(x)
        for corner in np.ndindex(2, 2, 2):
            weight = np.prod([w[:, a] if c else 1 - w[:, a] for a, c in enumerate(corner)], axis=0)
            shift += weight[:, None] * noise[i[:, 0] + corner[0], i[:, 1] + corner[1], i[:, 2] + corner[2]]
        x = x + m * shift
    return x


@pytest.mark.parametrize("params", [((0.2, 0.4),), ((0.2, 0.4), (0.8, 1.6)), ((0.37, 0.05),)])
def test_elastic_distortion_equals_its_definition_written_out(params):
    """Against an independent reference (slices for the blur, the 8 trilinear weights by hand) fed the same
    random stream: the same displaced points, to float32's rounding; the displacement is far from zero."""
    sample = make_sample(400, seed=3)
    out = ElasticDistortion(params=params, p=1.0)(sample, np.random.default_rng(7))
    expected = _elastic_reference(sample["coord"], params, np.random.default_rng(7))
    assert out["coord"].dtype == np.float32
    np.testing.assert_allclose(out["coord"], expected, rtol=0, atol=5e-7)
    assert np.abs(expected - sample["coord"]).max() > 0.01


def test_elastic_distortion_moves_a_translated_cloud_alike():
    """The grid is anchored at the points' minimum: the same draws move a cloud shifted by ``s`` by the same
    amounts, so the result is the first one shifted by ``s``."""
    sample, s = make_sample(300, seed=4), np.array([10.0, -5.0, 2.0], dtype=np.float32)
    moved = dict(sample, coord=sample["coord"] + s)
    a = ElasticDistortion(p=1.0)(sample, np.random.default_rng(1))["coord"]
    b = ElasticDistortion(p=1.0)(moved, np.random.default_rng(1))["coord"]
    np.testing.assert_allclose(b - s, a, rtol=0, atol=3e-6)


def test_chromatic_auto_contrast_with_full_blend_stretches_to_0_255():
    sample = make_sample()
    out = ChromaticAutoContrast(p=1.0, blend_factor=1.0)(sample, np.random.default_rng(0))
    np.testing.assert_allclose(out["color"].min(0), 0, atol=1e-4)
    np.testing.assert_allclose(out["color"].max(0), 255, atol=1e-3)
    lo, hi = sample["color"].min(0), sample["color"].max(0)
    np.testing.assert_allclose(out["color"], (sample["color"] - lo) * 255 / (hi - lo), rtol=1e-5)
    flat = dict(sample, color=np.full_like(sample["color"], 7.0))
    np.testing.assert_array_equal(ChromaticAutoContrast(1.0, 1.0)(flat, np.random.default_rng(0))["color"], 7.0)


def test_chromatic_translation_is_one_shift_within_ratio():
    sample = make_sample()
    out = ChromaticTranslation(p=1.0, ratio=0.05)(sample, np.random.default_rng(2))
    rng = np.random.default_rng(2)
    rng.random()  # the p draw
    shift = (rng.random(3) - 0.5) * 255 * 2 * 0.05
    np.testing.assert_allclose(out["color"], np.clip(sample["color"] + shift, 0, 255), rtol=1e-6)
    assert np.all(np.abs(shift) <= 255 * 0.05)


def test_chromatic_jitter_stays_in_0_255():
    sample = make_sample()
    out = ChromaticJitter(p=1.0, std=0.5)(sample, np.random.default_rng(0))
    assert out["color"].min() == 0 and out["color"].max() == 255   # std 0.5 * 255: clipped both ways


def test_add_normalized_height_and_to_data_layout():
    sample = AddNormalizedHeight()(make_sample())
    z = sample["coord"][:, 2]
    np.testing.assert_allclose(sample["height"], (z - z.min()) / (z.max() - z.min()), rtol=1e-6)
    data = ToData(height=True)(sample)
    assert data.x.shape == (200, 7) and data.x.dtype == torch.float32
    assert data.pos.dtype == torch.float32 and data.y.dtype == torch.int64
    np.testing.assert_allclose(data.x[:, :3].numpy(), sample["color"] / 255, rtol=1e-6)
    np.testing.assert_array_equal(data.x[:, 3:6].numpy(), sample["coord"])
    np.testing.assert_array_equal(data.x[:, 6].numpy(), sample["height"])
    assert ToData().in_channels == 6 and ToData()(sample).x.shape == (200, 6)
    with pytest.raises(KeyError, match="AddNormalizedHeight"):
        ToData(height=True)(make_sample())


def test_to_data_without_colour_is_geometry_only():
    sample = AddNormalizedHeight()(make_sample())
    no_color = {k: v for k, v in sample.items() if k != "color"}   # colour is never read
    data = ToData(color=False)(no_color)
    assert ToData(color=False).in_channels == 3 and data.x.shape == (200, 3)
    np.testing.assert_array_equal(data.x.numpy(), sample["coord"])
    data_h = ToData(color=False, height=True)(no_color)
    assert ToData(color=False, height=True).in_channels == 4 and data_h.x.shape == (200, 4)
    np.testing.assert_array_equal(data_h.x[:, 3].numpy(), sample["height"])


def test_reprs_are_readable():
    assert repr(RandomScale((0.9, 1.1))) == "RandomScale(scale=(0.9, 1.1), anisotropic=False)"
    assert repr(ChromaticAutoContrast()) == "ChromaticAutoContrast(p=0.2, blend_factor=None)"
    assert repr(ChromaticTranslation()) == "ChromaticTranslation(p=0.95, ratio=0.05)"
    assert repr(ChromaticJitter()) == "ChromaticJitter(p=0.95, std=0.005)"
    assert repr(HueSaturationTranslation()) == "HueSaturationTranslation(hue_max=0.5, saturation_max=0.2)"
    assert repr(RandomJitter()) == "RandomJitter(sigma=0.01, clip=0.05)"
    assert repr(RandomFlip()) == "RandomFlip(p=0.5)"
    assert repr(ElasticDistortion()) == "ElasticDistortion(params=((0.2, 0.4), (0.8, 1.6)), p=0.95)"
    assert repr(Compose([RandomFlip(), ToData()])) == ("Compose([\n  RandomFlip(p=0.5),\n"
                                                       "  ToData(height=False, color=True),\n])")


def test_bad_parameters_are_rejected():
    with pytest.raises(ValueError, match="low <= high"):
        RandomScale((1.1, 0.9))
    with pytest.raises(ValueError, match="clip > 0"):
        RandomJitter(0.01, 0.0)


def test_the_s3dis_sets_are_the_authors_and_pointcepts():
    """tool/train.py of POSTECH-CVLab/point-transformer; Pointcept configs/s3dis/semseg-pt-v1-0-base.py."""
    assert repr(s3dis_train_transform()) == (
        "Compose([\n  RandomScale(scale=(0.9, 1.1), anisotropic=False),\n"
        "  ChromaticAutoContrast(p=0.2, blend_factor=None),\n  ChromaticTranslation(p=0.95, ratio=0.05),\n"
        "  ChromaticJitter(p=0.95, std=0.005),\n  HueSaturationTranslation(hue_max=0.5, saturation_max=0.2),\n])")
    assert [repr(t) for t in s3dis_train_transform("pointcept").transforms] == [
        "RandomScale(scale=(0.9, 1.1), anisotropic=False)", "RandomFlip(p=0.5)", "RandomJitter(sigma=0.005, clip=0.02)",
        "ChromaticAutoContrast(p=0.2, blend_factor=None)", "ChromaticTranslation(p=0.95, ratio=0.05)",
        "ChromaticJitter(p=0.95, std=0.05)"]
    assert s3dis_train_transform("none").transforms == []
    with pytest.raises(ValueError, match="ptv1"):
        s3dis_train_transform("pt1")


def test_compose_applies_every_transform_in_order_with_one_generator():
    sample = make_sample()
    out = Compose([RandomScale((2.0, 2.0)), RandomScale((3.0, 3.0))])(sample, np.random.default_rng(0))
    np.testing.assert_allclose(out["coord"], sample["coord"] * 6.0, rtol=1e-6)   # a fixed factor (low == high)
    first, second = ChromaticTranslation(p=1.0), ChromaticJitter(p=1.0, std=0.05)
    rng = np.random.default_rng(7)
    expected = second(first(sample, rng), rng)
    np.testing.assert_array_equal(Compose([first, second])(sample, np.random.default_rng(7))["color"],
                                  expected["color"])


def test_chromatic_translation_clips_to_0_255():
    sample = make_sample()
    sample["color"][:5] = 0.0
    sample["color"][5:10] = 255.0
    for seed in range(10):
        out = ChromaticTranslation(p=1.0, ratio=0.05)(sample, np.random.default_rng(seed))["color"]
        shift = out[20] - sample["color"][20]                       # an unclipped point (20..200) gives the shift
        assert out.min() >= 0 and out.max() <= 255
        np.testing.assert_allclose(out[:5], np.broadcast_to(np.maximum(shift, 0), (5, 3)), atol=1e-4)
        np.testing.assert_allclose(out[5:10], np.broadcast_to(np.minimum(255 + shift, 255), (5, 3)), atol=1e-4)


def test_hue_saturation_translation_floors_to_whole_levels():
    """With no hue or saturation change the HSV round trip gives the colours back, floored to whole levels as
    the authors' conversion back to uint8 does (100.7 -> 100, not 101)."""
    sample = make_sample()
    levels = sample["color"].copy()                                     # whole levels 20..199
    sample["color"] = levels + np.float32(0.7)
    out = HueSaturationTranslation(hue_max=0.0, saturation_max=0.0)(sample, np.random.default_rng(0))["color"]
    np.testing.assert_array_equal(out, levels)
