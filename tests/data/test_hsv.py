"""The compiled hue/saturation shift against Python's own ``colorsys`` (an independent implementation of the
HSV model), point by point."""
from __future__ import annotations

import colorsys

import numpy as np
import pytest

from pointgeope.data.hsv import shift_hue_saturation


def _colorsys_shift(color: np.ndarray, dh: float, ratio: float) -> np.ndarray:
    out = []
    for c in color / 255.0:
        h, s, v = colorsys.rgb_to_hsv(*c)
        out.append(colorsys.hsv_to_rgb((h + dh) % 1.0, min(max(s * ratio, 0.0), 1.0), v))
    return np.array(out) * 255.0


def _colours() -> np.ndarray:
    rng = np.random.default_rng(3)
    levels = np.floor(rng.uniform(0, 256, (3000, 3)))                          # whole levels, as stored
    real = rng.uniform(0, 255, (1000, 3))                                       # after jitter: any real
    greys = np.repeat(np.arange(0, 256, 17.0)[:, None], 3, axis=1)
    corners = np.array([[255, 0, 0], [255, 255, 0], [0, 255, 0], [0, 255, 255], [0, 0, 255], [255, 0, 255],
                        [255, 128, 128], [10, 10, 11]], float)                  # sector edges, a near-grey
    return np.concatenate([levels, real, greys, corners])


@pytest.mark.parametrize("dh, ratio", [(0.0, 1.0), (0.3, 1.15), (-0.45, 0.8), (0.5, 1.2), (-0.5, 0.95)])
def test_shift_is_colorsys_per_point(dh, ratio):
    color = _colours()
    for dtype in (np.float32, np.float64):
        got = shift_hue_saturation(color.astype(dtype), dh, ratio)
        assert got.dtype == np.float64 and got.shape == color.shape
        np.testing.assert_allclose(got, _colorsys_shift(color.astype(dtype).astype(np.float64), dh, ratio),
                                   rtol=0, atol=1e-9)


def test_no_shift_returns_the_colours_and_greys_stay_grey():
    color = _colours()
    np.testing.assert_allclose(shift_hue_saturation(color, 0.0, 1.0), color, rtol=0, atol=1e-9)
    greys = np.repeat(np.arange(0, 256, 5.0)[:, None], 3, axis=1)
    np.testing.assert_array_equal(shift_hue_saturation(greys, 0.37, 1.2), greys)


def test_bad_shape_is_refused():
    with pytest.raises(ValueError, match=r"expected colours of shape \(N, 3\), got \(4, 4\)"):
        shift_hue_saturation(np.zeros((4, 4)), 0.1, 1.0)
