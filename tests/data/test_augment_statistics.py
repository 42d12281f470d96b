"""The authors' S3DIS augmentations, each checked by its effect on seeded data over many draws.

Each transform of ``s3dis_train_transform()`` runs with its default parameters (the ones the set uses)
on many seeds; the changes it makes are measured from its input and output alone and compared with the
published distribution (Kolmogorov-Smirnov tests at p > 0.001, rates within 4 binomial standard
deviations). Hue and saturation are measured with Python's own ``colorsys``.
"""
from __future__ import annotations

import colorsys

import numpy as np
import pytest
from scipy import stats

from pointgeope.data.transforms import (
    ChromaticAutoContrast,
    ChromaticJitter,
    ChromaticTranslation,
    HueSaturationTranslation,
    RandomScale,
)

SEEDS = range(1000)


def sample(n: int = 64, seed: int = 123, lo: float = 60, hi: float = 190) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"coord": (rng.random((n, 3)) * 4 + 0.5).astype(np.float32),
            "color": rng.integers(lo, hi, (n, 3)).astype(np.float32),
            "label": np.zeros(n, np.int64)}


def rate_is(applied: int, total: int, p: float) -> bool:
    return abs(applied / total - p) <= 4 * np.sqrt(p * (1 - p) / total)


def test_random_scale_is_uniform_between_0_9_and_1_1():
    s = sample()
    factors = [float(np.median(RandomScale()(s, np.random.default_rng(k))["coord"] / s["coord"])) for k in SEEDS]
    assert min(factors) >= 0.9 - 1e-6 and max(factors) <= 1.1 + 1e-6
    assert stats.kstest(factors, stats.uniform(0.9, 0.2).cdf).pvalue > 1e-3


def test_auto_contrast_applies_to_a_fifth_with_a_uniform_blend():
    s = sample()
    lo, hi = s["color"].min(0), s["color"].max(0)
    stretched = (s["color"] - lo) * 255 / (hi - lo)
    blends = []
    for k in SEEDS:
        out = ChromaticAutoContrast()(s, np.random.default_rng(k))["color"]
        if not np.array_equal(out, s["color"]):
            b = (out - s["color"]) / (stretched - s["color"])                  # per point and channel
            moved = np.abs(stretched - s["color"]) > 5
            blends.append(float(np.median(b[moved])))
            np.testing.assert_allclose(b[moved], blends[-1], atol=1e-3)       # one blend for all points
    assert rate_is(len(blends), len(SEEDS), 0.2)
    assert stats.kstest(blends, stats.uniform(0, 1).cdf).pvalue > 1e-3


def test_translation_applies_to_95_percent_one_uniform_shift_per_channel():
    s = sample()
    shifts = []
    for k in SEEDS:
        delta = ChromaticTranslation()(s, np.random.default_rng(k))["color"] - s["color"]
        if np.any(delta != 0):
            assert np.abs(delta - delta[0]).max() < 1e-4                          # same shift for every point
            shifts.append(delta[0])
    shifts = np.array(shifts)
    assert rate_is(len(shifts), len(SEEDS), 0.95)
    assert np.abs(shifts).max() <= 255 * 0.05
    for c in range(3):
        assert stats.kstest(shifts[:, c], stats.uniform(-12.75, 25.5).cdf).pvalue > 1e-3


def test_jitter_applies_to_95_percent_gaussian_with_std_0_005_of_255():
    s = sample(n=200)
    noise, applied = [], 0
    for k in SEEDS[:400]:
        delta = ChromaticJitter()(s, np.random.default_rng(k))["color"] - s["color"]
        if np.any(delta != 0):
            applied += 1
            noise.append(delta.ravel())
    noise = np.concatenate(noise)
    assert rate_is(applied, 400, 0.95)
    assert abs(noise.std() / (0.005 * 255) - 1) < 0.01                        # 1.275 colour levels
    assert stats.kstest(noise[:20000], stats.norm(0, 0.005 * 255).cdf).pvalue > 1e-3


def _hsv(color: np.ndarray) -> np.ndarray:
    return np.array([colorsys.rgb_to_hsv(*(c / 255.0)) for c in color])


def test_hue_saturation_shifts_hue_uniformly_over_the_circle_and_scales_saturation():
    # strongly coloured points: the floor to whole levels moves hue and saturation by < 0.01
    rng = np.random.default_rng(5)
    color = np.stack([np.full(40, 230.0), rng.uniform(30, 200, 40), np.full(40, 20.0)], 1)[:, rng.permutation(3)]
    s = {"coord": np.zeros((40, 3), np.float32), "color": np.floor(color).astype(np.float32),
         "label": np.zeros(40, np.int64)}
    before = _hsv(s["color"])
    hue_shifts, ratios = [], []
    for k in SEEDS[:500]:
        out = HueSaturationTranslation()(s, np.random.default_rng(k))["color"]
        np.testing.assert_array_equal(out, np.floor(out))                     # whole colour levels
        after = _hsv(out)
        np.testing.assert_allclose(after[:, 2], before[:, 2], atol=1 / 255)   # value kept
        dh = (after[:, 0] - before[:, 0] + 0.5) % 1.0 - 0.5                    # in [-0.5, 0.5)
        ref = dh[0]
        assert np.all(np.abs((dh - ref + 0.5) % 1.0 - 0.5) < 0.01)            # one shift for all points
        r = after[:, 1] / before[:, 1]
        if after[:, 1].max() < 0.99:                                           # unclipped saturation
            assert np.all(np.abs(r - np.median(r)) < 0.01)
            ratios.append(float(np.median(r)))
        hue_shifts.append(float(ref))
    assert stats.kstest(hue_shifts, stats.uniform(-0.5, 1.0).cdf).pvalue > 1e-3
    assert min(ratios) > 0.79 and max(ratios) < 1.21
    # saturations near 1 clip, so test the ratios of the unclipped draws below 1 only: U(0.8, 1)
    low = [r for r in ratios if r < 1.0]
    assert stats.kstest(low, stats.uniform(0.8, 0.2).cdf).pvalue > 1e-3


@pytest.mark.parametrize("color", [(0.0, 0.0, 0.0), (128.0, 128.0, 128.0), (255.0, 255.0, 255.0)])
def test_hue_saturation_leaves_greys_grey(color):
    s = {"coord": np.zeros((3, 3), np.float32), "color": np.tile(np.float32(color), (3, 1)),
         "label": np.zeros(3, np.int64)}
    out = HueSaturationTranslation()(s, np.random.default_rng(0))["color"]
    np.testing.assert_array_equal(out, s["color"])
